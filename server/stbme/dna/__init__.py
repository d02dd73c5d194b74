"""The DNA Memory layer: signals, strategies, dynamics (weight, decay, layers), repair loops, GEP assets
(genes, capsules, events), the scheduler and the optional hub. See ARCHITECTURE.md, "DNA Memory layer"."""
