"""Emission, loading and the compile targets for generated source."""
