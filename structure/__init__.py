"""Structure learning from search logs and the structured (GP-network) surrogate."""
