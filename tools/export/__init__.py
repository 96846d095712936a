"""A plan as the input of the framework that runs it (launcher arguments, TOML, JSON configs)."""
