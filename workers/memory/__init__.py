"""Memory logic without Celery tasks: points and provenance, episodes, typed memories, dynamics, the vault, entities."""
