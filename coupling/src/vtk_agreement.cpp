// VtkSeries::write's check that every rank passed the same time and staged the same point arrays (names,
// units, components, types, in order): one allgather of a 64-bit hash and the time; only when the hashes
// differ are the signatures themselves gathered, for a message that names the first array that differs.
#include <algorithm>

#include "vtk_detail.hpp"

namespace surrogate::vtk_detail {
namespace {

Error invalid(const std::string& message) { return Error(ErrorCode::invalid_argument, message); }

/// What every rank must stage identically: names, units, components, types, in order.
constexpr char kFieldSep = '\x1f', kEntrySep = '\x1e';

std::string signature_of(std::span<const StagedArray> arrays) {
  std::string s;
  for (const StagedArray& a : arrays) {
    s += a.name;
    s += kFieldSep;
    s += a.unit;
    s += kFieldSep;
    s += std::to_string(a.components);
    s += kFieldSep;
    s += a.type();
    s += kEntrySep;
  }
  return s;
}

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 14695981039346656037ull;
  for (const char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

struct SignatureEntry {
  std::string name, text;
};

std::vector<SignatureEntry> parse_signature(const std::string& signature) {
  std::vector<SignatureEntry> entries;
  std::size_t begin = 0;
  while (begin < signature.size()) {
    const std::size_t end = signature.find(kEntrySep, begin);
    const std::string entry = signature.substr(begin, end - begin);
    std::vector<std::string> f;
    std::size_t b = 0;
    for (;;) {
      const std::size_t e = entry.find(kFieldSep, b);
      f.push_back(entry.substr(b, e == std::string::npos ? std::string::npos : e - b));
      if (e == std::string::npos) break;
      b = e + 1;
    }
    f.resize(4);
    entries.push_back({f[0], f[0] + " (" + f[2] + " x " + f[3] + (f[1].empty() ? "" : ", " + f[1]) + ")"});
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return entries;
}

std::string describe(const std::vector<SignatureEntry>& entries) {
  std::string s = "[";
  for (std::size_t i = 0; i < entries.size(); ++i) s += (i ? ", " : "") + entries[i].text;
  return s + "]";
}

/// The message for two ranks that staged different arrays, naming the first array that differs.
std::string signature_mismatch(const std::string& context, int rank, const std::string& mine, const std::string& root) {
  const auto a = parse_signature(root), b = parse_signature(mine);
  std::string first;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()) && first.empty(); ++i) {
    if (i >= a.size()) first = b[i].name;
    else if (i >= b.size()) first = a[i].name;
    else if (a[i].text != b[i].text) first = a[i].name != b[i].name ? a[i].name + "' / '" + b[i].name : a[i].name;
  }
  return context + ": the staged point arrays differ between ranks (array '" + first + "'): rank 0 has " +
         describe(a) + ", rank " + std::to_string(rank) + " has " + describe(b);
}

}  // namespace

void check_ranks_agree(const MpiComm& comm, const std::string& context, double time,
                       std::span<const StagedArray> arrays) {
  const std::string signature = signature_of(arrays);
  struct Summary {
    std::uint64_t hash;
    double time;
  };
  const int size = comm.size();
  const Summary mine{fnv1a(signature), time};
  std::vector<Summary> all(static_cast<std::size_t>(size));
  comm.allgather(&mine, sizeof mine, all.data());
  for (int r = 1; r < size; ++r)
    if (all[static_cast<std::size_t>(r)].time != all[0].time)
      throw invalid("rank " + std::to_string(r) + ": " + context + ": write() at time " +
                    number(all[static_cast<std::size_t>(r)].time) + " but rank 0 writes time " + number(all[0].time));
  if (std::all_of(all.begin(), all.end(), [&](const Summary& x) { return x.hash == all[0].hash; })) return;

  // Rare path: gather the signatures themselves for a message that names the array.
  const std::size_t my_bytes = signature.size();
  std::vector<std::size_t> bytes(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  comm.allgather(&my_bytes, sizeof my_bytes, bytes.data());
  std::size_t total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += bytes[static_cast<std::size_t>(r)];
  }
  std::string everything(total, '\0');
  comm.allgatherv(signature.data(), my_bytes, everything.data(), bytes, offsets);
  const std::string root = everything.substr(0, bytes[0]);
  for (int r = 1; r < size; ++r) {
    const std::string other = everything.substr(offsets[static_cast<std::size_t>(r)], bytes[static_cast<std::size_t>(r)]);
    if (other != root) throw invalid("rank " + std::to_string(r) + ": " + signature_mismatch(context + ": write()", r, other, root));
  }
  throw Error(ErrorCode::internal, context + ": write(): the staged arrays hash differently but are equal");
}

}  // namespace surrogate::vtk_detail
