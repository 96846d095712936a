"""The CP-SAT model: built from the cost model's tables, solved, read back."""
