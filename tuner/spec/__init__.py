"""Study specs: TOML files and CLI options turned into one validated StudySpec."""
