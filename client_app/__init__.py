"""The fedspectral ClientApp and its NumPyClients."""
