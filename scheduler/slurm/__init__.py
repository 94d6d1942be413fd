"""The Slurm bridge: Rota governs and accounts, Slurm launches. No Django and no database credentials: it
speaks the portal's node API with one node token per Slurm node (``docs/slurm.md``)."""
