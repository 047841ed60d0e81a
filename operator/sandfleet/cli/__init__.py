"""The `sandfleet` command line: run, batch and replay on one machine with local sandboxes."""
