"""Every reader and writer of the user's data: tables, trajectories, readings, pictures."""
