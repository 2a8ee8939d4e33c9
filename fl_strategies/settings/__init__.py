"""The run configuration: its keys and checks, the strategy registry, participation."""
