//! causeway-proxy (being built; see issue 4).
