"""The GitHub side: the approval and the verdict gpu.yml posts, and the GPU test job."""
