"""Files a run reads and writes: data files, secrets, the PCA model, the simulation harness."""
