// The steps of RunClean (clean.cc) that `data clean --distributed` (distributed.cc) runs
// with the distributed scan in place of RunScan.
#ifndef TRAINSCOPE_DATA_CLEAN_INTERNAL_H_
#define TRAINSCOPE_DATA_CLEAN_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainscope/data/clean.h"

namespace trainscope::data {

// RunClean's checks before anything is read (see clean.h).
absl::Status CheckCleanInputs(const std::vector<InputFile>& inputs, const CleanOptions& options);

// The scan options of the first pass: doc arrays kept, near duplicates as dedup, no verdicts.
ScanOptions CleanScanOptions(const CleanOptions& options);

// Which documents of `scan` (its doc_* arrays; doc_file and doc_line unused) stay, and the
// report of that decision (output, bad records and tokenizer from the scan).
CleanReport DecideClean(const ScanResult& scan, const CleanOptions& options,
                        std::vector<uint8_t>* keep);

// Copies the lines of the kept documents (scan.doc_file / doc_line index `inputs`) to
// `output`, compressed as its name says. Errors: reading an input, writing the output (which
// appears only on success).
absl::Status CopyKeptDocuments(const std::vector<InputFile>& inputs, const ScanResult& scan,
                               const std::vector<uint8_t>& keep, const ReaderOptions& reader,
                               const std::string& output);

}  // namespace trainscope::data

#endif  // TRAINSCOPE_DATA_CLEAN_INTERNAL_H_
