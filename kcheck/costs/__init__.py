"""What a step costs: counted work in reference seconds, the pace, per-stage predictions."""
