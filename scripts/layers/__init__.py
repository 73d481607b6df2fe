"""scripts/check-layers: import cycles between modules (see that script's doc)."""
