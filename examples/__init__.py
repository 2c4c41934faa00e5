"""Example kernel specs written the way a team writes its own, outside tunefleet's packages."""
