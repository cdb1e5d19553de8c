"""`modelplan import`: winml-cli build recipes (WinMLBuildConfig JSON) become modelplan configs.

layout.py reads what a recipe's path says, convert.py maps one build's fields (model.py,
quant.py, target.py, export.py, optim.py, one section each) into a draft config while the
ledger (ledger.py) accounts for every field, and emit.py writes the draft as a primary config
of a user config tree. winml.py holds what the recipe format itself says, as data.
"""
