"""Many plans: grids of models x GPUs x counts, the sweep runner and its resumable files, the
scaling ladder and scaling curves."""
