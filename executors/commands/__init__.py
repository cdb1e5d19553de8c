"""The commands the local executor plugin adds to the modelplan CLI: `store ls | verify | gc`, and
the random-weight trace behind `modelplan inspect --hierarchy`."""
