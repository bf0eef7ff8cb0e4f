// The benchmark family's Gloo peer (issue #39): Gloo's own ring all-reduce
// (gloo::AllreduceRing, int32 sum) of `elements` values per rank, one process per rank on this
// host, connected by Gloo's TCP transport on loopback after a rendezvous through Gloo's file
// store (a folder every rank reads and writes). `ops` all-reduces are issued one after another
// (the next when the previous result is in), each timed on every rank around `run()`; the first
// `warmup` (connection set-up) are not counted. Every rank checks every result against the exact
// sum of all ranks' contributions, a closed form of rank, operation and element (the same values
// as the OpenMPI peer, systems/p4sgd/peer/mpi_allreduce_small.c; |value| <= 1000, so no sum of
// up to 2^21 ranks overflows int32).
//
// Built with g++ against Debian's libgloo-dev at run time (workloads/src/bench/gloo.rs).
//
// usage: gloo_allreduce RANK SIZE STORE_DIR ELEMENTS OPS WARMUP OUT_FILE [corrupt]
//   `corrupt` makes rank 1 add 1 to one element of every contribution without the others knowing:
//   every result is then wrong (the check's own test).
// Each rank writes OUT_FILE.RANK: a first line `rank R ranks S elements E ops N wrong W`, then
// N latencies in nanoseconds, one a line. Exit status 0 unless Gloo or the file failed.
#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

static int32_t value(int rank, long op, int i) {
  return (int32_t)(((uint32_t)rank * 2654435761u + (uint32_t)op * 40503u +
                    (uint32_t)i * 97u) %
                   2001u) -
         1000;
}

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr,
                 "usage: %s RANK SIZE STORE_DIR ELEMENTS OPS WARMUP OUT_FILE [corrupt]\n",
                 argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int size = std::atoi(argv[2]);
  const std::string store_dir = argv[3];
  const int elements = std::atoi(argv[4]);
  const long ops = std::atol(argv[5]);
  const long warmup = std::atol(argv[6]);
  const std::string path = std::string(argv[7]) + "." + std::to_string(rank);
  const bool corrupt = argc > 8 && std::strcmp(argv[8], "corrupt") == 0;
  if (size < 2 || rank < 0 || rank >= size || elements < 1 || ops < 1 || warmup < 0) {
    std::fprintf(stderr, "need SIZE >= 2, 0 <= RANK < SIZE, ELEMENTS and OPS >= 1, WARMUP >= 0\n");
    return 2;
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    gloo::rendezvous::PrefixStore prefix("inabench-gloo", store);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->connectFullMesh(prefix, dev);

    std::vector<int32_t> data(elements);
    std::vector<int32_t*> ptrs{data.data()};
    gloo::AllreduceRing<int32_t> ring(ctx, ptrs, elements);
    std::vector<double> t(ops);
    long wrong = 0;
    for (long k = -warmup; k < ops; k++) {
      const long op = k + warmup;
      for (int i = 0; i < elements; i++) data[i] = value(rank, op, i);
      if (corrupt && rank == 1) data[0] += 1;
      const auto t0 = std::chrono::steady_clock::now();
      ring.run();
      const auto t1 = std::chrono::steady_clock::now();
      if (k >= 0) t[k] = std::chrono::duration<double, std::nano>(t1 - t0).count();
      for (int i = 0; i < elements; i++) {
        int32_t expect = 0;
        for (int r = 0; r < size; r++) expect += value(r, op, i);
        if (data[i] != expect) {
          wrong++;
          break;
        }
      }
    }
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
      std::perror(path.c_str());
      return 1;
    }
    std::fprintf(f, "rank %d ranks %d elements %d ops %ld wrong %ld\n", rank, size, elements, ops,
                 wrong);
    for (long j = 0; j < ops; j++) std::fprintf(f, "%.0f\n", t[j]);
    if (std::fclose(f) != 0) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
