// The exactly-once digest's hash: XXH3-64 (seed 0) of one member's decoded bytes. A run's
// delivered digest is the sum modulo 2^64 of it over every delivered member (every file, or every
// tar member after decompression), so it can be checked independently of delivery order.
#pragma once

#include <cstdint>

#include "feedline/core/bytes.hpp"

namespace feedline::loader {

// On x86-64, libxxhash's run-time dispatch picks the widest vector unit the CPU has (AVX2 here:
// ~35 GB/s on 64 KiB, against ~12 GB/s for the SSE2 code a plain XXH3_64bits call gets from
// Debian's build); the values are the same.
std::uint64_t member_hash(ConstBytes bytes) noexcept;

struct Dataset;

// The identity of a dataset's listing: XXH3-64 over its format, each object's name (relative to
// the root, so a dataset moved or mounted elsewhere keeps it) and size, and each sample's object,
// its members' stored bytes and key, in storage order, and the digest gen's manifest recorded
// (when the dataset is exactly what gen wrote). Sample indices mean the same samples on two
// listings with the same fingerprint; another dataset of the same size, objects replaced by
// others of another size or layout, or shards whose contents were swapped (their members' names
// move) give another. The bytes themselves are not read. Samples' places are their members'
// stored bytes (kMembers), or the spans read (kSpans, which differ between a tar shard read
// through its index and one scanned: what earlier builds' states recorded, still accepted when
// one is resumed).
enum class SamplePlaces : bool { kMembers, kSpans };
std::uint64_t listing_fingerprint(const Dataset& dataset,
                                  SamplePlaces places = SamplePlaces::kMembers) noexcept;

}  // namespace feedline::loader
