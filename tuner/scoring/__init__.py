"""From measurements to judgements: objectives and SLO constraints, the one ranking rule,
launch-to-launch significance and the caveats on a number."""
