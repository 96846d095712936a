"""The command line and the workflows around the planner, one sub-package a responsibility:
`cli` (the `meshplan` command), `sweep` (many plans: grids, sweeps, the ladder, scaling curves),
`render` (tables and pictures), `export` (framework launch configs), `models` (Hugging Face
import) and `calibration` (published runs and the fitted constants). They use the planning core
(`meshplan.solver`) and the client; the core never imports them."""
