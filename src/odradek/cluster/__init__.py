"""Pure cluster logic: metadata image, assignment, group and controller state machines (no I/O)."""
