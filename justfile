# inabench tasks. `just` is a convenience: every recipe is one cargo command you can type yourself.
set shell := ["bash", "-cu"]

# Rerun an experiment in every class this machine can run (dashboard on a terminal, headless
# otherwise): just reproduce netreduce-table6
reproduce id *args:
    cargo run --release -p inabench -- reproduce {{id}} {{args}}

# Every claim of every experiment, per class, from the latest runs (and results/scoreboard.html)
scoreboard *args:
    cargo run --release -p inabench -- scoreboard {{args}}

# The whole quick sweep, ending with the scoreboard
sweep:
    cargo run --release -p inabench -- reproduce --all --profile quick --headless

# The test suite, as CI runs it
test:
    bash .ci/run

# The dashboard explicitly (fails over to headless without a terminal)
tui id *args:
    cargo run --release -p inabench -- reproduce {{id}} {{args}}

# Rebuild a stored run's report: just report latest
report run="latest" *args:
    cargo run --release -p inabench -- report {{run}} {{args}}

doctor:
    cargo run --release -p inabench -- doctor

list *args:
    cargo run --release -p inabench -- list {{args}}

# Benchmarks (criterion) under bench/
bench *args:
    cargo bench -p inabench-bench {{args}}

lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
