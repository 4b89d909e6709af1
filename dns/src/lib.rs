//! causeway-dns (being built; see issue 5).
