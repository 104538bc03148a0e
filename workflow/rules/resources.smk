# Cluster helpers shared by the rule files (docs/cluster.md).
#
# GPU counts reach a job in two ways: the config (`<stage>.gpus`, the rule's default) and, on a
# cluster, the profile's `set-resources` (profiles/slurm/config.yaml), which overrides the rule's
# resources. Rules that choose their device from `resources.gpus` therefore follow whichever applies;
# a device chosen from the config alone would leave a GPU the profile reserved unused.

# Conda environments (`--software-deployment-method conda`); paths are relative to workflow/rules/.
CPU_ENV = "../../envs/sieve-cpu.yaml"
CUDA_ENV = "../../envs/sieve-cuda.yaml"


def job_device(wildcards, resources):
    """params function: 'cuda' when the job holds GPUs, else 'cpu'."""
    return "cuda" if resources.get("gpus", 0) > 0 else "cpu"


def faiss_gpu_flag(wildcards, resources):
    """params function: pipeline.retrieval.index/search flag, '--no-gpu' unless the job holds GPUs."""
    return "" if resources.get("gpus", 0) > 0 else "--no-gpu"
