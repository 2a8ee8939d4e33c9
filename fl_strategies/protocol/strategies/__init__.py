"""The server strategies, one module per algorithm family."""
