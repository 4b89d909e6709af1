//! The search API with real kubectl and HTTP clients.
