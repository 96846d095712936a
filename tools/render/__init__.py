"""What a person reads: terminal tables and CSV rows of answers, and pictures (matplotlib)."""
