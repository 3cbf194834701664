// The text of an MPI job's report (loader/job_report.hpp makes its document), and what every
// rank of a job must agree on before it runs.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace feedline::tools {

// The text report of a job's document (loader::job_report_json()'s).
std::string job_text(const nlohmann::json& job);

// What every rank of a job must run with alike, in the words of its flags, in order: ("--epochs",
// "3"), ("--seed", "0"), ..., ("the dataset", "2000 samples, listing 0123456789abcdef"). A rank
// of another epoch count would wait at a barrier nobody else reaches; another seed, batch size,
// format or dataset shards another order, delivering some samples twice and others never.
using Agreement = std::vector<std::pair<std::string, std::string>>;
nlohmann::json agreement_json(const Agreement& a);
// The first of rank 0's items (ranks: each rank's agreement_json, in rank order) that another
// rank has otherwise, named with every rank that differs and its value, as one error message;
// nullopt when every rank agrees. who(r) names rank r ("rank 1 of 2 (host h2)").
std::optional<std::string> first_disagreement(const std::vector<nlohmann::json>& ranks,
                                              const std::function<std::string(unsigned)>& who);

}  // namespace feedline::tools
