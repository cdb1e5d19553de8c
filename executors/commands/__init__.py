"""The commands the local executor plugin adds to the modelplan CLI (the highest part: a command
may use any part below it): `store ls | verify | gc`, `generate`, and the random-weight trace
behind `modelplan inspect --hierarchy`."""
