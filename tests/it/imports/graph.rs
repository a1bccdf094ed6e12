//! A directed graph of named nodes whose edges remember where they were
//! written; its circles (strongly connected components of more than one
//! node) and, where it has none, its layers.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Where an edge was written: the first reference that makes it.
#[derive(Clone, Debug)]
pub struct Site {
    /// File and line (`src/exit.rs:19`).
    pub at: String,
    /// The path as written there.
    pub written: String,
}

/// Nodes by name and the edges between them.
#[derive(Debug, Default)]
pub struct Graph {
    /// The nodes' names.
    pub nodes: Vec<String>,
    /// Each edge (from, to) with the first place that makes it.
    pub edges: BTreeMap<(usize, usize), Site>,
}

impl Graph {
    /// The node named `name`, added if new.
    pub fn node(&mut self, name: &str) -> usize {
        match self.nodes.iter().position(|n| n == name) {
            Some(index) => index,
            None => {
                self.nodes.push(name.to_string());
                self.nodes.len() - 1
            }
        }
    }

    /// Adds the edge `from -> to` (a loop is dropped), keeping its first site.
    pub fn edge(&mut self, from: usize, to: usize, site: Site) {
        if from != to {
            self.edges.entry((from, to)).or_insert(site);
        }
    }

    fn successors(&self) -> Vec<Vec<usize>> {
        let mut next = vec![Vec::new(); self.nodes.len()];
        for &(from, to) in self.edges.keys() {
            next[from].push(to);
        }
        next
    }

    /// Every circle: the strongly connected components of two nodes or more,
    /// each as its node indices in ascending order.
    pub fn circles(&self) -> Vec<Vec<usize>> {
        let next = self.successors();
        let mut tarjan = Tarjan {
            next: &next,
            index: vec![None; self.nodes.len()],
            low: vec![0; self.nodes.len()],
            stack: Vec::new(),
            on_stack: vec![false; self.nodes.len()],
            counter: 0,
            found: Vec::new(),
        };
        for node in 0..self.nodes.len() {
            if tarjan.index[node].is_none() {
                tarjan.visit(node);
            }
        }
        let mut found: Vec<Vec<usize>> = tarjan.found.into_iter().filter(|c| c.len() > 1).collect();
        for component in &mut found {
            component.sort_unstable();
        }
        found.sort();
        found
    }

    /// One shortest way round `component` from its first node back to it.
    fn loop_in(&self, component: &[usize]) -> Vec<usize> {
        let inside: BTreeSet<usize> = component.iter().copied().collect();
        let start = component[0];
        let next = self.successors();
        let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(node) = queue.pop_front() {
            for &to in next[node].iter().filter(|t| inside.contains(t)) {
                if to == start {
                    let mut way = vec![node];
                    while let Some(&before) = parent.get(way.last().unwrap_or(&start)) {
                        way.push(before);
                    }
                    way.reverse();
                    way.push(start);
                    return way;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(to) {
                    e.insert(node);
                    queue.push_back(to);
                }
            }
        }
        vec![start]
    }

    /// A circle told in full: one way round it, then every edge inside it
    /// with where it is written, so that each can be judged.
    pub fn describe(&self, component: &[usize]) -> String {
        let way: Vec<&str> = self
            .loop_in(component)
            .into_iter()
            .map(|n| self.nodes[n].as_str())
            .collect();
        let mut text = format!("circle: {}\n", way.join(" -> "));
        let inside: BTreeSet<usize> = component.iter().copied().collect();
        for (&(from, to), site) in &self.edges {
            if inside.contains(&from) && inside.contains(&to) {
                text += &format!(
                    "    {} -> {}  ({}: {})\n",
                    self.nodes[from], self.nodes[to], site.at, site.written
                );
            }
        }
        text
    }

    /// The nodes from the top down: each node's layer is the longest way
    /// from it to a node that imports nothing, so every node imports only
    /// nodes of lower layers. Names within a layer in order. `None` where
    /// the graph has a circle.
    pub fn layers(&self) -> Option<Vec<Vec<usize>>> {
        if !self.circles().is_empty() {
            return None;
        }
        let next = self.successors();
        let mut height: Vec<Option<usize>> = vec![None; self.nodes.len()];
        fn measure(node: usize, next: &[Vec<usize>], height: &mut [Option<usize>]) -> usize {
            if let Some(h) = height[node] {
                return h;
            }
            let h = next[node]
                .iter()
                .map(|&to| measure(to, next, height) + 1)
                .max()
                .unwrap_or(0);
            height[node] = Some(h);
            h
        }
        let mut by_height: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for node in 0..self.nodes.len() {
            let h = measure(node, &next, &mut height);
            by_height.entry(h).or_default().push(node);
        }
        let mut layers: Vec<Vec<usize>> = by_height.into_values().rev().collect();
        for layer in &mut layers {
            layer.sort_by(|&a, &b| self.nodes[a].cmp(&self.nodes[b]));
        }
        Some(layers)
    }

    /// The names `node` imports, in order.
    pub fn imports_of(&self, node: usize) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .edges
            .keys()
            .filter(|(from, _)| *from == node)
            .map(|&(_, to)| self.nodes[to].as_str())
            .collect();
        names.sort_unstable();
        names
    }
}

/// Tarjan's strongly connected components.
struct Tarjan<'a> {
    next: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    stack: Vec<usize>,
    on_stack: Vec<bool>,
    counter: usize,
    found: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, node: usize) {
        self.index[node] = Some(self.counter);
        self.low[node] = self.counter;
        self.counter += 1;
        self.stack.push(node);
        self.on_stack[node] = true;
        for &to in self.next[node].iter() {
            match self.index[to] {
                None => {
                    self.visit(to);
                    self.low[node] = self.low[node].min(self.low[to]);
                }
                Some(index) if self.on_stack[to] => {
                    self.low[node] = self.low[node].min(index);
                }
                Some(_) => {}
            }
        }
        if Some(self.low[node]) == self.index[node] {
            let mut component = Vec::new();
            while let Some(top) = self.stack.pop() {
                self.on_stack[top] = false;
                component.push(top);
                if top == node {
                    break;
                }
            }
            self.found.push(component);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::default();
        for (from, to) in edges {
            let (from, to) = (g.node(from), g.node(to));
            let site = Site {
                at: "here".to_string(),
                written: String::new(),
            };
            g.edge(from, to, site);
        }
        g
    }

    #[test]
    fn circles_are_found_and_told() {
        let g = graph(&[
            ("a", "b"),
            ("b", "c"),
            ("c", "a"),
            ("c", "d"),
            ("d", "e"),
            ("e", "d"),
        ]);
        let circles = g.circles();
        assert_eq!(circles, [vec![0, 1, 2], vec![3, 4]]);
        assert!(g
            .describe(&circles[0])
            .starts_with("circle: a -> b -> c -> a\n"));
        assert!(g.describe(&circles[1]).starts_with("circle: d -> e -> d\n"));
        assert!(g.layers().is_none());
    }

    #[test]
    fn layers_run_down() {
        let g = graph(&[
            ("cli", "job"),
            ("job", "queue"),
            ("cli", "queue"),
            ("wall", "wall"),
        ]);
        let layers: Vec<Vec<&str>> = g
            .layers()
            .unwrap()
            .into_iter()
            .map(|l| l.into_iter().map(|n| g.nodes[n].as_str()).collect())
            .collect();
        assert_eq!(layers, [vec!["cli"], vec!["job"], vec!["queue", "wall"]]);
    }
}
