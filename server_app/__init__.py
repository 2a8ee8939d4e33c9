"""The fedspectral ServerApp."""
