//! Health of a member object per kind (federation.md §8 H.54, Karmada's `healthy.go`).
