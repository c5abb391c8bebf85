//! Placeholder for the model registry.
