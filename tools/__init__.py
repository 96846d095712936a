"""The command line and the workflows around the planner: sweeps, ladders, plots, exports,
Hugging Face import and calibration. They use the planning core (`meshplan.solver`) and the
client; the core never imports them."""
