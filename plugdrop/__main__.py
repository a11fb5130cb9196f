from plugdrop.cli import entry

entry()
