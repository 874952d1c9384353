#include "tools/kiln/args.h"

#include <charconv>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::cli {

ArgParser::ArgParser(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

ArgParser& ArgParser::Option(std::string name, std::string value_name, std::string help, std::string fallback,
                             std::string alias) {
  options_.push_back({std::move(name), std::move(value_name), std::move(help), std::move(fallback),
                      std::move(alias), false});
  return *this;
}

ArgParser& ArgParser::Flag(std::string name, std::string help) {
  options_.push_back({std::move(name), "", std::move(help), "", "", true});
  return *this;
}

ArgParser& ArgParser::Positional(std::string name, std::string help, bool required) {
  positionals_.push_back({std::move(name), "", std::move(help), required ? "" : "?", "", false});
  return *this;
}

const ArgParser::Spec* ArgParser::FindSpec(const std::string& token) const {
  for (const Spec& s : options_) {
    if (token == "--" + s.name || (!s.alias.empty() && token == s.alias)) return &s;
  }
  return nullptr;
}

absl::Status ArgParser::Parse(int argc, char** argv) {
  size_t next_positional = 0;
  for (int k = 1; k < argc; ++k) {
    std::string tok = argv[k];
    if (tok == "-h" || tok == "--help") {
      help_ = true;
      return absl::OkStatus();
    }
    if (tok.size() > 1 && tok[0] == '-' && !(tok.size() > 1 && std::isdigit(static_cast<unsigned char>(tok[1])))) {
      std::string value;
      bool has_inline = false;
      if (const size_t eq = tok.find('='); tok.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = tok.substr(eq + 1);
        tok = tok.substr(0, eq);
        has_inline = true;
      }
      const Spec* spec = FindSpec(tok);
      if (spec == nullptr) {
        std::string known;
        for (const Spec& s : options_) absl::StrAppend(&known, known.empty() ? "" : ", ", "--", s.name);
        return absl::InvalidArgumentError(absl::StrCat("unknown option ", tok, " (known: ",
                                                       known.empty() ? "none" : known, ")"));
      }
      if (spec->is_flag) {
        if (has_inline) return absl::InvalidArgumentError(absl::StrCat("--", spec->name, " takes no value"));
        values_[spec->name] = "1";
        continue;
      }
      if (!has_inline) {
        if (k + 1 >= argc) {
          return absl::InvalidArgumentError(absl::StrCat("--", spec->name, " needs a value (", spec->value_name, ")"));
        }
        value = argv[++k];
      }
      values_[spec->name] = value;
      continue;
    }
    if (next_positional >= positionals_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", tok, "'"));
    }
    values_[positionals_[next_positional++].name] = tok;
  }
  for (size_t k = next_positional; k < positionals_.size(); ++k) {
    if (positionals_[k].fallback.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("missing ", positionals_[k].name));
    }
  }
  return absl::OkStatus();
}

std::string ArgParser::Help() const {
  std::string usage = absl::StrCat("usage: kiln ", command_);
  for (const Spec& p : positionals_) absl::StrAppend(&usage, p.fallback.empty() ? " " : " [", p.name,
                                                     p.fallback.empty() ? "" : "]");
  if (!options_.empty()) absl::StrAppend(&usage, " [options]");
  std::string out = absl::StrCat(usage, "\n\n", summary_, "\n");
  if (!positionals_.empty()) {
    absl::StrAppend(&out, "\narguments:\n");
    for (const Spec& p : positionals_) absl::StrAppend(&out, absl::StrFormat("  %-24s %s\n", p.name, p.help));
  }
  absl::StrAppend(&out, "\noptions:\n");
  for (const Spec& s : options_) {
    std::string left = absl::StrCat(s.alias.empty() ? "" : s.alias + ", ", "--", s.name,
                                    s.is_flag ? "" : " " + s.value_name);
    std::string help = s.help;
    if (!s.fallback.empty()) absl::StrAppend(&help, " (default: ", s.fallback, ")");
    absl::StrAppend(&out, absl::StrFormat("  %-24s %s\n", left, help));
  }
  absl::StrAppend(&out, absl::StrFormat("  %-24s %s\n", "-h, --help", "show this help"));
  return out;
}

bool ArgParser::Has(const std::string& name) const { return values_.count(name) > 0; }

std::string ArgParser::Get(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  for (const Spec& s : options_) {
    if (s.name == name) return s.fallback;
  }
  return "";
}

bool ArgParser::GetFlag(const std::string& name) const { return Has(name); }

absl::StatusOr<int64_t> ArgParser::GetInt(const std::string& name) const {
  const std::string v = Get(name);
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " expects an integer, got '", v, "'"));
  }
  return out;
}

absl::StatusOr<double> ArgParser::GetDouble(const std::string& name) const {
  const std::string v = Get(name);
  char* end = nullptr;
  const double out = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " expects a number, got '", v, "'"));
  }
  return out;
}

std::optional<int> ArgParser::ParseOrExit(int argc, char** argv) {
  if (absl::Status s = Parse(argc, argv); !s.ok()) return Fail(command_, std::string(s.message()));
  if (help_) {
    std::printf("%s", Help().c_str());
    return 0;
  }
  if (FindSpec("--output-format") != nullptr) {
    const std::string format = Get("output-format");
    if (format != "text" && format != "json") return Fail(command_, "--output-format takes text or json");
  }
  return std::nullopt;
}

int Fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "kiln %s: %s\n", command.c_str(), message.c_str());
  std::fprintf(stderr, "(see 'kiln %s --help')\n", command.c_str());
  return 1;
}

}  // namespace kiln::cli
