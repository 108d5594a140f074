"""``python -m opdweb.exports``: print the table of targets the README carries."""
from opdweb.exports import targets_table

print(targets_table(), end="")
