"""Published training runs and the cost model's efficiency constants fitted to them: the
vendored runs (published/), their loaders, the knobs a run leaves unstated, scoring and fitting."""
