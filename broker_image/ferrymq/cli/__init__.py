"""The `ferrymq` command line: typer parses, one library call, rich renders, exit code."""
