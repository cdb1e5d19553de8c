"""One module per op: `run(ctx: StepContext) -> StepResult`."""
