"""Publishing a run's results: `outputs/<run-name>/` gets verified copies of the deliverable and
what ops publish (outputs), made a model folder that clients open on their own (model_folder)."""
