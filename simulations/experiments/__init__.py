"""Paper reproductions: one folder per paper with its configs, scripts, committed results and README."""
