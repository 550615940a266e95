// Subcommand registration: each subcommand lives in its own file and adds itself to the CLI11 app.
// The callback runs after parsing and returns the process exit code through `exit_code`.
#pragma once

namespace CLI {
class App;
}

namespace memwall::cli {

void register_predict(CLI::App& app, int& exit_code);
void register_info(CLI::App& app, int& exit_code);
void register_plan(CLI::App& app, int& exit_code);
void register_simulate(CLI::App& app, int& exit_code);
void register_sweep(CLI::App& app, int& exit_code);
void register_io_bench(CLI::App& app, int& exit_code);
void register_store(CLI::App& app, int& exit_code);
void register_train(CLI::App& app, int& exit_code);
void register_export(CLI::App& app, int& exit_code);
void register_generate(CLI::App& app, int& exit_code);
void register_tokenize(CLI::App& app, int& exit_code);
void register_replay(CLI::App& app, int& exit_code);
void register_calibrate(CLI::App& app, int& exit_code);
void register_tune(CLI::App& app, int& exit_code);
void register_completion(CLI::App& app, int& exit_code);

}  // namespace memwall::cli
