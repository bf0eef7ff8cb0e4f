//! Seeded synthetic classification data (no downloads): for the MLP, `classes` Gaussian clusters
//! in `dims` dimensions with unit noise; for the CNN, `side` x `side` images where each class is a
//! bar at its own orientation and position, plus noise. Both are learnable but not trivially, so
//! losses fall over hundreds of steps.

use inabench_rng::SplitMix64;

#[derive(Debug, Clone)]
pub struct Dataset {
    pub xs: Vec<Vec<f32>>,
    pub ys: Vec<usize>,
}

fn normal(g: &mut SplitMix64) -> f32 {
    g.normal() as f32
}

/// Gaussian clusters.
pub fn clusters(n: usize, dims: usize, classes: usize, seed: u64) -> Dataset {
    let mut g = SplitMix64::derive(seed, "clusters");
    let centres: Vec<Vec<f32>> = (0..classes)
        .map(|_| (0..dims).map(|_| normal(&mut g) * 0.6).collect())
        .collect();
    let mut d = Dataset {
        xs: Vec::with_capacity(n),
        ys: Vec::with_capacity(n),
    };
    for i in 0..n {
        let y = i % classes;
        d.xs.push(centres[y].iter().map(|c| c + normal(&mut g)).collect());
        d.ys.push(y);
    }
    d
}

/// Bar images.
pub fn bars(n: usize, side: usize, classes: usize, seed: u64) -> Dataset {
    let mut g = SplitMix64::derive(seed, "bars");
    let mut d = Dataset {
        xs: Vec::with_capacity(n),
        ys: Vec::with_capacity(n),
    };
    for i in 0..n {
        let y = i % classes;
        let mut img: Vec<f32> = (0..side * side).map(|_| normal(&mut g) * 0.5).collect();
        let off = (g.next_u64() % side as u64) as usize;
        for k in 0..side {
            let (r, c) = match y % 4 {
                0 => (off, k),
                1 => (k, off),
                2 => (k, k),
                _ => (k, side - 1 - k),
            };
            img[r * side + c] += 1.0 + (y / 4) as f32;
        }
        d.xs.push(img);
        d.ys.push(y);
    }
    d
}

/// Token sequences for the transformer: `seq` tokens drawn from `1..=classes`, one of them (not
/// the last) replaced by the marker token 0; the class is the token right after the marker
/// (minus one). Solving it needs attention from the marker's position to its successor; the
/// vocabulary is `classes + 1` tokens. Token ids are stored as floats.
pub fn marked(n: usize, seq: usize, classes: usize, seed: u64) -> Dataset {
    let mut g = SplitMix64::derive(seed, "marked");
    let mut d = Dataset {
        xs: Vec::with_capacity(n),
        ys: Vec::with_capacity(n),
    };
    for _ in 0..n {
        let mut x: Vec<f32> = (0..seq)
            .map(|_| (1 + g.next_u64() % classes as u64) as f32)
            .collect();
        let at = (g.next_u64() % (seq.max(2) as u64 - 1)) as usize;
        x[at] = 0.0;
        let y = x[at + 1] as usize - 1;
        d.xs.push(x);
        d.ys.push(y);
    }
    d
}
