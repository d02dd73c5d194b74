"""The memory graph: node and edge records, the schema of node types and relations, graph operations."""
