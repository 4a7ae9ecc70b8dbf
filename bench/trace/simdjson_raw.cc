// The limit: simdjson's raw parse speed of a Chrome trace. Loads the whole file (padded) and
// walks every field of every traceEvents element with ondemand, materialising nothing.
//   simdjson_raw FILE   -> prints {"bytes":..,"events":..,"fields":..,"seconds":..,"gb_per_s":..}
#include <chrono>
#include <cstdio>

#include "simdjson.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: simdjson_raw FILE\n");
    return 2;
  }
  auto t0 = std::chrono::steady_clock::now();
  simdjson::padded_string json;
  if (simdjson::padded_string::load(argv[1]).get(json)) {
    fprintf(stderr, "simdjson_raw: cannot load %s\n", argv[1]);
    return 2;
  }
  auto t1 = std::chrono::steady_clock::now();
  simdjson::ondemand::parser parser(json.size() + 64);
  simdjson::ondemand::document doc;
  if (parser.iterate(json).get(doc)) return 2;
  simdjson::ondemand::array events;
  if (doc["traceEvents"].get_array().get(events)) return 2;
  uint64_t n = 0, fields = 0;
  for (auto e : events) {
    simdjson::ondemand::object o;
    if (e.get_object().get(o)) return 2;
    for (auto f : o) {
      std::string_view k;
      if (f.unescaped_key().get(k)) return 2;
      ++fields;
    }
    ++n;
  }
  auto t2 = std::chrono::steady_clock::now();
  double load_s = std::chrono::duration<double>(t1 - t0).count();
  double parse_s = std::chrono::duration<double>(t2 - t1).count();
  printf(
      "{\"bytes\": %zu, \"events\": %llu, \"fields\": %llu, \"load_s\": %.3f, \"parse_s\": %.3f, "
      "\"parse_gb_per_s\": %.3f, \"implementation\": \"%s\"}\n",
      json.size(), static_cast<unsigned long long>(n), static_cast<unsigned long long>(fields),
      load_s, parse_s, json.size() / parse_s / 1e9,
      simdjson::builtin_implementation()->name().c_str());
  return 0;
}
