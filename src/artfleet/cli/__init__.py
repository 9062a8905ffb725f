"""The `artfleet` command line."""
