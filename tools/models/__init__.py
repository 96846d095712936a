"""Model architectures read from files people already have (a Hugging Face `config.json`)."""
