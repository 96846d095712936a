"""The `meshplan` command line: flags, request input, the commands and their messages."""
