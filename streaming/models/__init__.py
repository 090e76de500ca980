"""Versioned model artifacts (content-hashed) and the pointer scorers pin from."""
