"""The lineage store and the search-space geometry. Imports no other Cambrian package."""
