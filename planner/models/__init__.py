"""What a checkpoint is: its task and modality (tasks), its input and output specs (specs), where it comes from (sources), tiny random-weight test models."""
