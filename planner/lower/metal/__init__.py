"""The Metal backend: loop program → MSL source, type-checked and run in an emulator."""
