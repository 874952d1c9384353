// A small command-line parser for kiln's subcommands: `--name value`,
// `--name=value`, boolean `--flag`, positionals, `-h/--help`, and an error
// that names an unknown option and lists the known ones.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::cli {

class ArgParser {
 public:
  ArgParser(std::string command, std::string summary);

  // `--name VALUE` (with an optional short alias like "-o"); empty default
  // means "not set" unless given.
  ArgParser& Option(std::string name, std::string value_name, std::string help, std::string fallback = "",
                    std::string alias = "");
  ArgParser& Flag(std::string name, std::string help);
  ArgParser& Positional(std::string name, std::string help, bool required = true);

  // Parses argv[1..argc). After it, help_requested() says whether to print Help().
  absl::Status Parse(int argc, char** argv);
  // Every subcommand's start: parses argv and, where the command should stop
  // there, returns its exit code: 0 after printing Help() for --help, 1
  // after Fail() for a bad argument or an --output-format other than text
  // or json (where the command has that option).
  std::optional<int> ParseOrExit(int argc, char** argv);
  bool help_requested() const { return help_; }
  std::string Help() const;

  bool Has(const std::string& name) const;
  std::string Get(const std::string& name) const;
  bool GetFlag(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<double> GetDouble(const std::string& name) const;

 private:
  struct Spec {
    std::string name, value_name, help, fallback, alias;
    bool is_flag = false;
  };
  const Spec* FindSpec(const std::string& token) const;

  std::string command_, summary_;
  std::vector<Spec> options_;
  std::vector<Spec> positionals_;
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

// Shared ending of every subcommand's error path: prints "kiln CMD: MESSAGE"
// and a hint to --help, returns the exit code.
int Fail(const std::string& command, const std::string& message);

}  // namespace kiln::cli
